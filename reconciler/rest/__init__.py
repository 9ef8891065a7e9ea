"""The Service Bus management REST API (ATOM over HTTPS): entity discovery, and rules where AMQP is refused.

``atom`` is the document codec (the emulator's REST server shares it); ``client`` is the HTTPS
client. Importing the package loads neither, so the emulator does not load the client.
"""
