"""The configuration: ``FinetuneConfig`` (every default, once), values typed by jsonargparse, ``ConfigError``, where a
configuration comes from (notebook parameters, YAML recipes, flags), where a model or data argument points
(``locations``: a local path that exists, or a Hub id that answers or is cached), secrets, the long-row policies.
Imports only ``machine``.
"""
