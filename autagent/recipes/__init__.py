"""The recipes, one module per command: ``train`` (make train), ``evaluate`` (autagent eval), ``adapt``,
``sweep``; ``run`` holds what they share (splits, tool records, the logger, the run's context)."""
