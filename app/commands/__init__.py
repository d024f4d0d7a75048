"""One module per pipeline subcommand: `add_arguments(parser)` and `run(args, cfg) -> int`.

app/cli.py finds them by name (stream -> app.commands.stream, one per entry of `cli.COMMANDS`).
Beside them: `outcome` (the exit codes and the final print every command uses) and `options`
(options more than one command takes). A command never imports the CLI.
"""
