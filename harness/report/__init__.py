"""How results are shown: terminal tables, Markdown/HTML/JSON documents, plots and POPCORN streams."""
