"""Static files of the browser UI served by ``WebSocketPlatform`` (no build step)."""
