"""The application layer: the namespace a command works on (:mod:`~reconciler.app.target`) and the
use cases every entry point runs over it (:mod:`~reconciler.app.operations`) — the command line,
the demo, the benchmarks and library users alike."""
