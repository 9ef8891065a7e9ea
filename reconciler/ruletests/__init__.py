"""Routing unit tests for rule files (``sbrules test``): test files beside the rules (``cases``),
run offline through the compiled topic router (``run``), the sub-expression that decided each
failure (``explain``), likely typos (``typos``) and the report formats (``report``)."""
