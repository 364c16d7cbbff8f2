"""What the framework folders share: the plug-in's type, provenance, launch scripts, metrics logs."""
