"""An NServiceBus endpoint starting up on a shared topic, played with Microsoft's SDK.

NServiceBus' Azure Service Bus transport gives each endpoint a subscription on the shared topic,
whose `$default` rule has a false filter (it delivers nothing by itself), and adds one rule per
event the endpoint subscribes to, named after the event type and filtering on the message's
`NServiceBus.EnclosedMessageTypes` header. A second start finds both there and changes nothing.

usage: python framework_startup.py TOPIC ENDPOINT EVENT_TYPE
    connection string in $SERVICEBUS_CONNECTION_STRING; for the emulator's HTTPS certificate,
    its CA file in $REQUESTS_CA_BUNDLE (`sbrules emulator --ca-file FILE` writes it)
"""

import os
import sys

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.servicebus.management import FalseRuleFilter, ServiceBusAdministrationClient, SqlRuleFilter

topic, endpoint, event = sys.argv[1:4]
admin = ServiceBusAdministrationClient.from_connection_string(os.environ["SERVICEBUS_CONNECTION_STRING"])
with admin:
    try:
        admin.get_subscription(topic, endpoint)
        print(f"subscription {topic}/{endpoint}: there already")
    except ResourceNotFoundError:
        admin.create_subscription(topic, endpoint)
        default = admin.get_rule(topic, endpoint, "$Default")  # the service's catch-all, made with it
        default.filter = FalseRuleFilter()
        admin.update_rule(topic, endpoint, default)
        print(f"subscription {topic}/{endpoint}: created, its $Default delivering nothing")
    try:
        admin.create_rule(
            topic, endpoint, event, filter=SqlRuleFilter(f"[NServiceBus.EnclosedMessageTypes] LIKE '%{event}%'")
        )
        print(f"rule {event!r}: created")
    except ResourceExistsError:
        print(f"rule {event!r}: there already")
