"""The Service Bus management REST API (ATOM over HTTPS): entity discovery, and rules where AMQP is refused."""

from reconciler.rest.atom import AtomError, SubscriptionInfo
from reconciler.rest.client import ManagementRestClient

__all__ = ["AtomError", "ManagementRestClient", "SubscriptionInfo"]
