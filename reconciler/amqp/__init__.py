"""AMQP 1.0 `$management` client for Service Bus: codec, connection strings, SAS/CBS, operations."""
