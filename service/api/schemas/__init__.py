"""Request and response models of the HTTP API (pydantic v2), one module per resource."""
