"""The AMQP 1.0 wire format: one type table (``types``) from which the byte encoder (``encode``)
and decoder (``decode``) are built, and messages as their sections (``sections``).

Nothing here knows Service Bus or the model; ``reconciler.amqp.codec`` and
``reconciler.amqp.messages`` map the model onto these values.
"""
