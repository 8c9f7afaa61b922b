"""Who may do what: sites, their API keys, authentication and the principal of a request."""
