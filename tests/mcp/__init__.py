"""Tests of app/mcp: the MCP client and the tool loop against real servers."""
