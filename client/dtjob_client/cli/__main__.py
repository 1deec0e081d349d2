"""`python -m dtjob_client.cli`: the same as `kubectl dtj`."""

from dtjob_client.cli import main

main()
