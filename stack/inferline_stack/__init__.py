"""The local stack: every inferline process started on this machine, with pids and logs in .run/."""
