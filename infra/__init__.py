"""Infrastructure of the recipe: typed configs, the stage driver, backends, sandbox and the `rufus` CLI."""
