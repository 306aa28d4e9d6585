"""The demo client's commands, one module each: ``load``, ``classify`` and ``video``; what they
share is in :mod:`demo_client.commands.common`."""
