"""The Jinja2 templates, shipped inside the wheel as the package `builder.templates` (see builder/template_files.py)."""
