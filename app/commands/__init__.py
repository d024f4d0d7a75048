"""One module per subcommand that does real work: `add_arguments(parser)` and `run(args, cfg) -> int`.

app/cli.py finds them by name (stream -> app.commands.stream); a subcommand without a module here
says plainly that it is not implemented yet.
"""
