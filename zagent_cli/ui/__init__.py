"""``zagent ui``: the web console over the home's journal (docs/console.md).

``command`` is the click command (it says how to install the ``ui`` extra when it is
missing); ``server`` binds, guards with the access token and serves ``app``'s routes; the
pages are drawn on the server (``pages``, ``timeline``) from the journal's views, and a
session's page and the list follow the journal's change feed, which ``server`` gives
(``live``: one thread per console, streams to the pages). A person's decision goes through
``deciding``, the same drive as ``zagent answer``, ``approve`` and ``deny``; every form
answers with a redirect to a session's page, which says once what it found (``said``).
"""
