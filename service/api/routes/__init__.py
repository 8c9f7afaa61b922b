"""HTTP routers, one module per resource; ``service.main`` includes them.

Each router carries its full path prefix (``APIRouter(prefix=f"{API_V1}/sites", ...)``) and is
included without a prefix: the route's own ``path`` is then the full template, which the
metrics use as their ``route`` label.
"""

API_V1 = "/v1"
