"""Periodic tasks: cron expressions and their due slots, and the schedules made at run
time, shown and changed on the application's connection."""
