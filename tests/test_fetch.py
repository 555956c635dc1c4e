"""The arXiv API fetcher against a local HTTP server (loopback only) that speaks the API's Atom feed."""

import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from arxivqa.corpus import fetch_arxiv, iter_papers

ENTRY = """<entry>
  <id>http://arxiv.org/abs/{id}v2</id><published>{date}T17:59:59Z</published>
  <title>{title}
    over two lines</title>
  <summary>  An abstract about {title}. </summary>
  <author><name>Ada Lovelace</name></author><author><name>Alan Turing</name></author>
  <arxiv:comment>12 pages</arxiv:comment>
  <arxiv:primary_category term="{cat}"/><category term="{cat}"/><category term="stat.ML"/>
</entry>"""


def feed(entries):
    return ('<?xml version="1.0" encoding="UTF-8"?><feed xmlns="http://www.w3.org/2005/Atom" '
            'xmlns:arxiv="http://arxiv.org/schemas/atom">' + "".join(entries) + "</feed>")


@pytest.fixture
def fake_api():
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            seen.append(q)
            query, start = q["search_query"][0], int(q["start"][0])
            cat = query.split()[0].removeprefix("cat:")
            entries = []
            if "202503" in query and start == 0:  # two pages of 2 for March, one cross-listed paper
                entries = [ENTRY.format(id="2503.00001", date="2025-03-02", title="Paper one", cat=cat),
                           ENTRY.format(id="2503.00002", date="2025-03-05", title="Paper two", cat=cat)]
            elif "202503" in query and start == 2 and cat == "cs.LG":
                entries = [ENTRY.format(id="2503.00003", date="2025-03-09", title="Paper three", cat=cat)]
            body = feed(entries).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/atom+xml")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/query", seen
    server.shutdown()


def test_fetch_pages_dedupes_and_writes_the_corpus_format(tmp_path, fake_api):
    url, seen = fake_api
    out = tmp_path / "corpus.jsonl.gz"
    n = fetch_arxiv(out, "2025-03-01", "2025-04-30", ["cs.LG", "cs.AI"], api_url=url, page_size=2, delay=0)
    papers = list(iter_papers(out))
    assert n == 3 and [p.arxiv_id for p in papers] == ["2503.00001", "2503.00002", "2503.00003"]
    p = papers[0]
    assert p.title == "Paper one over two lines" and p.abstract == "An abstract about Paper one."
    assert p.authors == ["Ada Lovelace", "Alan Turing"] and p.comment == "12 pages"
    assert p.primary_category == "cs.LG" and "stat.ML" in p.categories and str(p.published) == "2025-03-02"
    windows = {q["search_query"][0] for q in seen}
    assert "cat:cs.AI AND submittedDate:[202504010000 TO 202504302359]" in windows


def test_fetch_without_network_is_a_clear_error(tmp_path):
    with pytest.raises(ConnectionError, match="needs internet"):
        fetch_arxiv(tmp_path / "c.jsonl", "2025-03-01", "2025-03-31", ["cs.AI"], api_url="http://127.0.0.1:9/api",
                    delay=0, retries=0)
    assert not (tmp_path / "c.jsonl").exists()
