"""AMQP 1.0 `$management` client for Service Bus: the wire codec, the connection engine (CBS, link pairs), operations."""
