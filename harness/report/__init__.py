"""How results are shown: terminal tables, Markdown/HTML/CSV/JSON documents, plots and POPCORN streams.

Data flows figures -> boards -> tables -> sections (a document model, document.py) -> render_md / render_html
(jinja2 templates in templates/); render_data writes CSV and JSON; render.py picks by format. compare.py and
history.py show A-versus-B comparisons and a variant's runs over time; console.py and stacked.py the terminal."""
