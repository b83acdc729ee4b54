"""The CLI's exit codes and shared defaults: what every subcommand module needs from the CLI, kept
apart from `main` (which imports the subcommands) so that no subcommand imports `main` back."""

OK, FAILED, USAGE = 0, 1, 2  # 0 ok, 1 a check failed, 2 usage or input error
DEFAULT_CONTROL = "http://127.0.0.1:7080"
