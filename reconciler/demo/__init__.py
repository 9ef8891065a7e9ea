"""The guided demo (``sbrules demo``): the GitOps loop against a local emulator, through public APIs only.

``rules/`` here is the package's copy of the repository's ``rules/`` (a test keeps them identical),
so an installed wheel can run the demo anywhere.
"""

from reconciler.demo.drift import Drift, drifted_namespace
from reconciler.demo.run import demo_rules, run_demo

__all__ = ["Drift", "demo_rules", "drifted_namespace", "run_demo"]
