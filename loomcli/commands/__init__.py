"""One module per `loom` subcommand; each is imported only when it runs."""
