"""The configuration: ``FinetuneConfig`` (every default, once), value coercion and ``ConfigError``, where a
configuration comes from (notebook parameters, YAML recipes, flags), secrets, the long-row policies.
Imports only ``machine``.
"""
