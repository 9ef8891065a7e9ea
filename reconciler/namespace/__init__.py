"""A Service Bus namespace as both transports see it: connection strings, credentials (SAS, Entra ID),
the network settings (transport, proxy, CAs), reachability, the error classes, the credit model,
pacing, the retry policy and the request pipeline. Neither AMQP nor HTTP: ``reconciler.amqp`` and
``reconciler.rest`` build on it.
"""
