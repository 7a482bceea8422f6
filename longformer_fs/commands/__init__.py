"""``longformer-fs`` subcommands (other than ``bench``): each parses its arguments, calls
the library (``data_prep``, ``conversion``, ``evaluation``) and prints the result."""
