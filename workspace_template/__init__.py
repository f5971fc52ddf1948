"""What a new workspace starts as, shipped as package data of eat (eat.workspace_template)."""
