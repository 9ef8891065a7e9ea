"""Plays a framework's start-up: it removes its rule and adds it again (as MassTransit and NServiceBus
do when they find a rule different from their configuration), with sbrules' own AMQP client.

usage: python framework_restart.py TOPIC SUBSCRIPTION RULE SQL   (connection string in $SERVICEBUS_CONNECTION_STRING)
"""

import os
import sys

from reconciler.amqp.client import ManagementClient
from reconciler.model import Rule, SqlFilter
from reconciler.namespace.errors import NotFoundError

topic, subscription, name, sql = sys.argv[1:5]
with ManagementClient(os.environ["SERVICEBUS_CONNECTION_STRING"]) as client:
    try:
        client.remove_rule(topic, subscription, name)
    except NotFoundError:
        pass
    client.add_rule(topic, subscription, Rule(name, SqlFilter(sql)))
