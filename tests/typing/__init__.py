"""Static typing: mypy --strict accepts and rejects the typed job API as documented."""
