"""A container made by ``reactor.container`` builds no default TLS settings and leaves proton as it was."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from proton import _reactor as proton_reactor
from proton.reactor import Container

from reconciler.amqp import reactor

pytestmark = pytest.mark.unit


def test_a_container_without_default_tls() -> None:
    made = reactor.container()
    assert isinstance(made, Container)
    assert made.ssl is None
    assert made.container_id  # the rest of proton's set-up happened


def test_proton_keeps_its_defaults_for_everyone_else() -> None:
    reactor.container()
    assert proton_reactor.SSLConfig is not reactor._NoDefaultTLS
    assert Container().ssl is not None


def test_containers_made_on_several_threads_at_once() -> None:
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: reactor.container(), range(16)))
    assert all(c.ssl is None for c in made)
    assert proton_reactor.SSLConfig is not reactor._NoDefaultTLS
