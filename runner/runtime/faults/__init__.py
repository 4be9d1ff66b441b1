"""Fault kinds as plugins of the trigger engine: the interface is in `base`, what a plugin is
built from in `resources`, the kinds' registry in `registry`.

Kinds live in their own modules (`lost_response`, ...) and are imported from there. This
package re-exports nothing, so that importing it stays cheap and no module of it imports back
into its own package.
"""
