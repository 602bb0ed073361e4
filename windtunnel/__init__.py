"""The wind tunnel: crash, power-loss, I/O-error, tamper, concurrency and hostile-input
suites run against real stores by real child processes (`chronos-git windtunnel`)."""
