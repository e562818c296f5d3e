"""The pages: one package each, its script (`<page>/<page>.py`) beside the code only it uses."""
