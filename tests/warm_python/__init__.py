"""The recipe tests' fork server for stage processes: server.py, client.py and the `python` stand-in."""
