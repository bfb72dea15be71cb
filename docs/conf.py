# Sphinx configuration of the documentation site (`make docs`, tools/docs.sh): the pages of docs/ (Markdown) and the
# reference antsibull-docs writes from the collection's own documentation and argument specs (collections/).
project = "sturdy.workers"
copyright = "sturdy.workers contributors"  # pylint: disable=redefined-builtin
title = "sturdy.workers"
html_short_title = "sturdy.workers"

extensions = ["myst_parser", "sphinx_antsibull_ext"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# Links to a heading of another page ([text](deploy.md#releases-a-build-and-its-config)) are checked like the rest.
myst_heading_anchors = 3

pygments_style = "ansible"
highlight_language = "YAML+Jinja"
html_theme = "sphinx_ansible_theme"
html_theme_options = {"topbar_links": {}, "globaltoc_collapse": True}
html_show_sphinx = False
html_use_modindex = False
html_use_index = False
html_copy_source = False

# Every reference must resolve (warnings are errors): the few antsibull-docs makes to Ansible's own documentation are
# defined in ansible-refs.rst, so no network is needed.
nitpicky = True
default_role = "any"
