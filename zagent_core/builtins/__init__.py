"""The built-in tools: one module each, one registry (:mod:`zagent_core.builtins.registry`).

A built-in gets what it needs of the session through :class:`~zagent_core.tools.inprocess.BuiltinContext`
and never imports the engine.
"""
