"""The office cache as the CLI sees it: the cache host's state and hit rates (`provision status`)."""
