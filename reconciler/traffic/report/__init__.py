"""The traffic report as a typed model, and one module per format that renders it."""
