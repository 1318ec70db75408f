"""Word count with TLS on every link: the quick start's job, its links encrypted.

Every link between a job's processes on Spark (worker to worker, worker to job master) is
authenticated whatever you configure: it begins with a challenge-response over a secret the job
master makes for the job (docs/security.md). `tls=TlsConfig(...)` encrypts them too, with the
standard `ssl` module: each process presents a certificate and requires its peers' to be signed
by the same authority. Here a throw-away authority and certificate are made in `tls/` with the
`openssl` command (`make_test_certificates`, for trying it on one machine); on a cluster, give
the paths of your own files, present at the same paths on the driver and every executor, or set
EPOCHAL_TLS_CERT, EPOCHAL_TLS_KEY and EPOCHAL_TLS_CA.

    python examples/secure_wordcount.py     # on the embedded local Spark: its links over TLS
    epochal run examples/secure_wordcount.py --executor inprocess   # one process: no links at all

It counts the words of `corpus/` (the quick start's demo corpus, written if missing) into
`out-secure/`, starting over on every run as the quick start does.
"""

import os
import sys

from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource
from epochal.testing import make_test_certificates

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wordcount import write_demo_corpus  # noqa: E402

if __name__ == "__main__":
    if not os.path.exists("corpus"):
        write_demo_corpus("corpus")
    tls = make_test_certificates("tls")  # tls/ca.pem, tls/node.pem, tls/node.key (new every run)

    env = StreamEnvironment(parallelism=2, tls=tls,
                            checkpoint=CheckpointConfig(interval=1.0, directory="ckpt-secure", existing="overwrite"))
    (env.from_source(TextFileSource("corpus/"))
        .flat_map(str.split)
        .key_by(lambda w: w)
        .count()
        .sink_to(FileSink("out-secure/", mode="overwrite")))
    result = env.execute("secure-wordcount")

    print(f"secure_wordcount: {result.operator('sink').records_in:,} updates committed to out-secure/ "
          f"over TLS links ({os.path.basename(tls.certfile)}), {result.restarts} restart(s)")
