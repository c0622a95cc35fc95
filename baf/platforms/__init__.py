"""Platforms: adapters between a wire format and an agent's events and replies."""

from baf.platforms.base import Platform

__all__ = ["Platform"]
