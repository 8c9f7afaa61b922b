"""A node's outbound side (issue 15): the HTTP link to its coordinator and the agent."""
