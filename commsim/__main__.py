from commsim.cli import entry

entry()
