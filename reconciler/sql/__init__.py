"""The Service Bus SQL language: parser, AST, canonical printer, evaluator, actions, routing."""
