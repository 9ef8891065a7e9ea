"""sbrules: rules-as-code for Azure Service Bus subscription filters."""

__version__ = "0.1.0"
