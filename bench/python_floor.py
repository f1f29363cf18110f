"""The least a Python client can spend on the same LISTs as curl's floor: the interpreter starting (no site
packages), ssl and http.client imported, one TLS connection, each URL read and thrown away. What no Python command
can go below, whatever it imports lazily.

With --cli, the least a command line of gpualign's making can spend: the same, plus its CLI framework (typer)
imported and the first URL's nodes decoded as a check decodes them (their names and labels, by msgspec). Run it
with site packages (no -S), where gpualign is installed.

    python3 -S bench/python_floor.py CA CERT KEY URL [URL ...] [--accept MEDIA-TYPE-FOR-THE-FIRST]
    .venv/bin/python bench/python_floor.py CA CERT KEY URL [URL ...] [--accept MEDIA-TYPE-FOR-THE-FIRST] --cli
"""

import http.client
import ssl
import sys
from urllib.parse import urlsplit


def main(argv: list[str]) -> None:
    accept = None
    if "--accept" in argv:
        at = argv.index("--accept")
        accept = argv[at + 1]
        del argv[at:at + 2]
    decode = None
    if "--cli" in argv:
        argv.remove("--cli")
        import typer  # noqa: F401 - its import is what is measured

        from gpualign.kube.node_meta import decoder

        decode = decoder.decode
    ca, cert, key, *urls = argv
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert, key)
    first = urlsplit(urls[0])
    conn = http.client.HTTPSConnection(first.hostname, first.port, context=context)
    for i, url in enumerate(urls):
        part = urlsplit(url)
        headers = {"Accept": accept} if accept and i == 0 else {}
        conn.request("GET", f"{part.path}?{part.query}" if part.query else part.path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise SystemExit(f"{url}: HTTP {resp.status}")
        if decode is not None and i == 0:
            decode(body)
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
