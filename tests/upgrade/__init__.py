"""The upgrade rehearsal: the previous release's workers and producers on a database that this
release's ``txqueue init`` migrates under them, then this release's workers taking over."""
