"""TokenCut object discovery (``make tokencut``): ``run`` (the entry point), the normalized cut (``ncut``),
CorLoc (``corloc``), a backbone's result (``result``) and its tables and figures (``outputs``)."""
