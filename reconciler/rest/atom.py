"""The management REST API's ATOM documents: entity descriptions and rules, both directions.

One home for the XML shapes (docs/rest.md): the client parses feeds and entries with it, and the
emulator writes them with it, as ``amqp/codec.py`` serves both sides of AMQP. Documents are ATOM
``feed``/``entry`` elements whose ``content`` holds a ``TopicDescription``,
``SubscriptionDescription`` or ``RuleDescription`` in the Service Bus ``connect`` namespace; a
filter or action names its kind in ``i:type``. Incoming XML is parsed with defusedxml (no entity
expansion, no external references); outgoing XML is written as text so that namespace prefixes
(``i:``, ``d6p1:``) are exactly the ones the service uses.
"""

from __future__ import annotations

import datetime as _dt
import math
import uuid
from dataclasses import dataclass
from typing import Iterable
from xml.etree.ElementTree import Element
from xml.sax.saxutils import escape, quoteattr

import defusedxml.ElementTree as SafeET

from reconciler import model
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.typed_values import INTEGER_RANGES

ATOM_NS = "http://www.w3.org/2005/Atom"
SB_NS = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
XSD_NS = "http://www.w3.org/2001/XMLSchema"
#: The data-contract serialization namespace: guid, char and duration values are typed in it, not in XSD.
SER_NS = "http://schemas.microsoft.com/2003/10/Serialization/"
#: DateTimeOffset is a data contract of its own: a UTC DateTime and an offset in minutes.
SYSTEM_NS = "http://schemas.datacontract.org/2004/07/System"
XML_CONTENT_TYPE = "application/atom+xml;type=entry;charset=utf-8"
FEED_CONTENT_TYPE = "application/atom+xml;type=feed;charset=utf-8"

#: Correlation filter elements in the service's order, with the model field each one holds.
CORRELATION_ELEMENTS = (
    ("CorrelationId", "correlation_id"),
    ("MessageId", "message_id"),
    ("To", "to"),
    ("ReplyTo", "reply_to"),
    ("Label", "subject"),
    ("SessionId", "session_id"),
    ("ReplyToSessionId", "reply_to_session_id"),
    ("ContentType", "content_type"),
)
#: Typed value kinds as the service writes them (local name of i:type) ⇄ the model's value types.
#: XSD's byte is signed like AMQP's (.NET sbyte). Symbols are strings once on the broker.
VALUE_KINDS = {
    "string": model.ValueType.STRING,
    "byte": model.ValueType.BYTE,
    "unsignedByte": model.ValueType.UBYTE,
    "short": model.ValueType.SHORT,
    "unsignedShort": model.ValueType.USHORT,
    "int": model.ValueType.INT,
    "unsignedInt": model.ValueType.UINT,
    "long": model.ValueType.LONG,
    "unsignedLong": model.ValueType.ULONG,
    "float": model.ValueType.FLOAT,
    "double": model.ValueType.DOUBLE,
    "decimal": model.ValueType.DECIMAL,
    "boolean": model.ValueType.BOOL,
    "dateTime": model.ValueType.TIMESTAMP,
    "guid": model.ValueType.UUID,
    "char": model.ValueType.CHAR,
    "duration": model.ValueType.TIMESPAN,
    "anyURI": model.ValueType.URI,
    "base64Binary": model.ValueType.BINARY,
    "DateTimeOffset": model.ValueType.DATETIMEOFFSET,
}
_KIND_OF = {vtype: kind for kind, vtype in VALUE_KINDS.items()}
_KIND_OF[model.ValueType.SYMBOL] = "string"
_NAMESPACE_OF = {"guid": SER_NS, "char": SER_NS, "duration": SER_NS, "DateTimeOffset": SYSTEM_NS}
#: Durations the service reports for "never" (TimeSpan.MaxValue) and its defaults.
MAX_DURATION = "P10675199DT2H48M5.4775807S"


class AtomError(SbrulesError):
    """A management API document that does not have the expected shape."""

    code = ErrorCode.SERVICE


def _q(ns: str, tag: str) -> str:
    return f"{{{ns}}}{tag}"


# ------------------------------------------------------------------------------------------------
# what the documents describe
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubscriptionInfo:
    """The properties of a subscription that decide how sbrules can read it."""

    topic: str
    name: str
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    requires_session: bool = False
    status: str = "Active"

    @property
    def auto_forwarding(self) -> bool:
        """Messages are forwarded elsewhere: the service refuses enumerate-rules on it."""
        return bool(self.forward_to)


@dataclass(frozen=True)
class Page:
    """One page of a feed: its entries and whether the service linked a next page."""

    entries: list[Element]
    next_link: str | None


# ------------------------------------------------------------------------------------------------
# reading (client)
# ------------------------------------------------------------------------------------------------


def parse(data: bytes) -> Element:
    """The document element of ``data``; refuses DTDs, entities and external references."""
    try:
        return SafeET.fromstring(data)
    except SafeET.ParseError as exc:
        raise AtomError(f"the management API answered with malformed XML ({exc})") from None
    except Exception as exc:  # defusedxml's refusals (DTDForbidden, EntitiesForbidden, ...)
        raise AtomError(f"the management API answered with forbidden XML ({type(exc).__name__})") from None


def page(data: bytes) -> Page:
    """The entries of a feed (an empty feed has none; a lone entry is a page of one)."""
    root = parse(data)
    if root.tag == _q(ATOM_NS, "entry"):
        return Page([root], None)
    if root.tag != _q(ATOM_NS, "feed"):
        raise AtomError(f"expected an ATOM feed, got <{_local(root.tag)}>")
    next_link = None
    for link in root.findall(_q(ATOM_NS, "link")):
        if link.get("rel") == "next":
            next_link = link.get("href")
    return Page(root.findall(_q(ATOM_NS, "entry")), next_link)


def entry_title(entry: Element) -> str:
    title = entry.findtext(_q(ATOM_NS, "title"))
    if not title:
        raise AtomError("an ATOM entry has no title (the entity name)")
    return title


def _description(entry: Element, kind: str) -> Element:
    content = entry.find(_q(ATOM_NS, "content"))
    found = content.find(_q(SB_NS, kind)) if content is not None else None
    if found is None:
        raise AtomError(f"entry {entry.findtext(_q(ATOM_NS, 'title'))!r} has no {kind}")
    return found


def _text(parent: Element, tag: str) -> str | None:
    child = parent.find(_q(SB_NS, tag))
    if child is None or child.get(_q(XSI_NS, "nil")) == "true":
        return None
    return child.text or ""


def _bool(parent: Element, tag: str) -> bool:
    return (_text(parent, tag) or "").strip().lower() == "true"


def subscription_from_entry(topic: str, entry: Element, name: str | None = None) -> SubscriptionInfo:
    """The subscription an entry describes (``name``: the one its URL names, for an entry a client
    PUTs, which has no title)."""
    desc = _description(entry, "SubscriptionDescription")
    return SubscriptionInfo(
        topic=topic,
        name=name or entry_title(entry),
        forward_to=_text(desc, "ForwardTo") or None,
        forward_dead_lettered_messages_to=_text(desc, "ForwardDeadLetteredMessagesTo") or None,
        requires_session=_bool(desc, "RequiresSession"),
        status=_text(desc, "Status") or "Active",
    )


def namespace_sku(entry: Element) -> str | None:
    """The tier of the namespace a ``$namespaceinfo`` entry describes: Basic, Standard or Premium."""
    return _text(_description(entry, "NamespaceInfo"), "MessagingSKU")


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1]


def _kind(element: Element, what: str) -> str:
    kind = element.get(_q(XSI_NS, "type"))
    if not kind:
        raise AtomError(f"{what} has no i:type")
    return kind.rsplit(":", 1)[-1]


def _value(element: Element, where: str) -> model.TypedValue:
    """A typed property value. i:type is ``prefix:kind``; ElementTree drops prefix bindings, so the
    kind is told by its local name (the XSD and serialization kinds do not share names)."""
    if element.get(_q(XSI_NS, "nil")) == "true":
        return model.TypedValue(model.ValueType.NULL, None)
    kind = _kind(element, where)
    vtype = VALUE_KINDS.get(kind)
    if vtype is None:
        raise AtomError(f"{where} has type {kind!r}, which sbrules does not represent")
    text = element.text or ""
    try:
        if vtype in INTEGER_RANGES:
            return model.TypedValue(vtype, int(text))
        if vtype in (model.ValueType.DOUBLE, model.ValueType.FLOAT):
            return model.TypedValue(vtype, float(text))  # XSD's NaN, INF and -INF parse too
        if vtype is model.ValueType.BOOL:
            return model.TypedValue(vtype, text.strip().lower() == "true")
        if vtype is model.ValueType.UUID:
            return model.TypedValue(vtype, uuid.UUID(text))
        if vtype is model.ValueType.CHAR:
            return model.TypedValue(vtype, chr(int(text)))
        if vtype is model.ValueType.DATETIMEOFFSET:
            moment = element.find(_q(SYSTEM_NS, "DateTime"))
            if moment is None or not moment.text:
                raise ValueError("no DateTime")
            return model.TypedValue(vtype, moment.text)
        if vtype is model.ValueType.TIMESTAMP or vtype is model.ValueType.DECIMAL:
            return model.TypedValue.from_typed_form({vtype.value: text.strip()})
        return model.TypedValue.from_typed_form({vtype.value: text})
    except (ValueError, model.TypedValueError) as exc:
        raise AtomError(f"{where}: {text!r} is not a valid {kind} ({exc})") from None


def _filter(element: Element, rule: str) -> model.Filter:
    kind = _kind(element, f"rule {rule!r} filter")
    if kind == "TrueFilter":
        return model.TrueFilter()
    if kind == "FalseFilter":
        return model.FalseFilter()
    if kind == "SqlFilter":
        return model.SqlFilter(_text(element, "SqlExpression") or "")
    if kind == "CorrelationFilter":
        fields = {name: _text(element, tag) for tag, name in CORRELATION_ELEMENTS}
        properties = []
        container = element.find(_q(SB_NS, "Properties"))
        for pair in container.findall(_q(SB_NS, "KeyValueOfstringanyType")) if container is not None else ():
            key = pair.findtext(_q(SB_NS, "Key"))
            value = pair.find(_q(SB_NS, "Value"))
            if key is None or value is None:
                raise AtomError(f"rule {rule!r}: a correlation property lacks Key or Value")
            properties.append((key, _value(value, f"rule {rule!r} property {key!r}")))
        return model.CorrelationFilter(**{k: v for k, v in fields.items() if v is not None}, properties=tuple(properties))
    raise AtomError(f"rule {rule!r} has a filter of unknown type {kind!r}")


def _action(element: Element | None, rule: str) -> model.Action:
    if element is None or element.get(_q(XSI_NS, "nil")) == "true":
        return model.NO_ACTION
    kind = _kind(element, f"rule {rule!r} action")
    if kind == "EmptyRuleAction":
        return model.NO_ACTION
    if kind == "SqlRuleAction":
        return model.SqlRuleAction(_text(element, "SqlExpression") or "")
    raise AtomError(f"rule {rule!r} has an action of unknown type {kind!r}")


def rule_from_entry(entry: Element) -> model.Rule:
    desc = _description(entry, "RuleDescription")
    name = _text(desc, "Name") or entry_title(entry)
    flt = desc.find(_q(SB_NS, "Filter"))
    if flt is None:
        raise AtomError(f"rule {name!r} has no Filter")
    created = _created_at(_text(desc, "CreatedAt"))
    return model.Rule(name, _filter(flt, name), _action(desc.find(_q(SB_NS, "Action")), name), created_at=created)


def _created_at(text: str | None) -> _dt.datetime | None:
    """A ``CreatedAt`` as the service writes it (seven fractional digits, ``Z``), or None when absent
    or unreadable: the time only labels a rule, so a strange one is not worth failing a read."""
    if not text:
        return None
    head, _, fraction = text.rstrip("Z").partition(".")
    try:
        when = _dt.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return None
    digits = (fraction + "000000")[:6]
    return when.replace(microsecond=int(digits)) if digits.isdigit() else when


def error_detail(data: bytes) -> str | None:
    """The ``Detail`` of an ``<Error>`` body, when the body is one."""
    try:
        root = SafeET.fromstring(data)
    except Exception:  # an error body that is not XML has no detail to offer
        return None
    if _local(root.tag) != "Error":
        return None
    for child in root:
        if _local(child.tag) == "Detail":
            return (child.text or "").strip() or None
    return None


# ------------------------------------------------------------------------------------------------
# writing (emulator)
# ------------------------------------------------------------------------------------------------


def timestamp(value: _dt.datetime) -> str:
    """ISO 8601 in UTC with seven fractional digits and ``Z``, as the service writes times."""
    value = value.astimezone(_dt.timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond:06d}0Z"


def _el(tag: str, text: object) -> str:
    return f"<{tag}>{escape(str(text))}</{tag}>"


def _value_xml(value: model.TypedValue) -> str:
    """A typed value as the data-contract serializer writes an ``object`` (docs/rest.md)."""
    vtype, raw = value.type, value.value
    if vtype is model.ValueType.NULL:
        return '<Value i:nil="true"/>'
    kind = _KIND_OF[vtype]
    if vtype is model.ValueType.BOOL:
        text = "true" if raw else "false"
    elif vtype in (model.ValueType.DOUBLE, model.ValueType.FLOAT):
        written = value.to_typed_form(explicit=True)[vtype.value]
        text = "NaN" if math.isnan(raw) else "INF" if raw == math.inf else "-INF" if raw == -math.inf else repr(written)
    elif vtype is model.ValueType.TIMESTAMP:
        text = timestamp(raw)
    elif vtype is model.ValueType.CHAR:
        text = str(ord(raw))
    elif vtype is model.ValueType.DATETIMEOFFSET:
        moment = _el("d6p1:DateTime", value.to_typed_form()[vtype.value])
        return f'<Value xmlns:d6p1="{SYSTEM_NS}" i:type="d6p1:{kind}">{moment}<d6p1:OffsetMinutes>0</d6p1:OffsetMinutes></Value>'
    elif vtype in (model.ValueType.DECIMAL, model.ValueType.TIMESPAN, model.ValueType.BINARY):
        text = value.to_typed_form()[vtype.value]
    else:
        text = str(raw)
    namespace = _NAMESPACE_OF.get(kind, XSD_NS)
    return f'<Value xmlns:d6p1="{namespace}" i:type="d6p1:{kind}">{escape(text)}</Value>'


def _sql(kind: str, tag: str, expression: str) -> str:
    return f'<{tag} i:type="{kind}">{_el("SqlExpression", expression)}<CompatibilityLevel>20</CompatibilityLevel></{tag}>'


def _filter_xml(flt: model.Filter) -> str:
    if isinstance(flt, model.TrueFilter):
        return _sql("TrueFilter", "Filter", "1=1")
    if isinstance(flt, model.FalseFilter):
        return _sql("FalseFilter", "Filter", "1=0")
    if isinstance(flt, model.SqlFilter):
        return _sql("SqlFilter", "Filter", flt.expression)
    parts = [_el(tag, getattr(flt, name)) for tag, name in CORRELATION_ELEMENTS if getattr(flt, name) is not None]
    pairs = "".join(
        f"<KeyValueOfstringanyType>{_el('Key', key)}{_value_xml(value)}</KeyValueOfstringanyType>"
        for key, value in flt.properties
    )
    return f'<Filter i:type="CorrelationFilter">{"".join(parts)}<Properties>{pairs}</Properties></Filter>'


def _action_xml(action: model.Action) -> str:
    if isinstance(action, model.SqlRuleAction):
        return _sql("SqlRuleAction", "Action", action.expression)
    return '<Action i:type="EmptyRuleAction"/>'


def rule_description(rule: model.Rule, created_at: _dt.datetime) -> str:
    return (
        f'<RuleDescription xmlns="{SB_NS}" xmlns:i="{XSI_NS}">{_filter_xml(rule.filter)}{_action_xml(rule.action)}'
        f"{_el('CreatedAt', timestamp(created_at))}{_el('Name', rule.name)}</RuleDescription>"
    )


def subscription_description(info: SubscriptionInfo, created_at: _dt.datetime, message_count: int) -> str:
    when = timestamp(created_at)
    optional = "".join(
        _el(tag, value)
        for tag, value in (("ForwardTo", info.forward_to),
                           ("ForwardDeadLetteredMessagesTo", info.forward_dead_lettered_messages_to))
        if value
    )
    return (
        f'<SubscriptionDescription xmlns="{SB_NS}" xmlns:i="{XSI_NS}">'
        f"<LockDuration>PT1M</LockDuration>{_el('RequiresSession', 'true' if info.requires_session else 'false')}"
        f"<DefaultMessageTimeToLive>{MAX_DURATION}</DefaultMessageTimeToLive>"
        "<DeadLetteringOnMessageExpiration>false</DeadLetteringOnMessageExpiration>"
        "<DeadLetteringOnFilterEvaluationExceptions>true</DeadLetteringOnFilterEvaluationExceptions>"
        f"{_el('MessageCount', message_count)}<MaxDeliveryCount>10</MaxDeliveryCount>"
        f"<EnableBatchedOperations>true</EnableBatchedOperations>{_el('Status', info.status)}{optional}"
        f"{_el('CreatedAt', when)}{_el('UpdatedAt', when)}{_el('AccessedAt', when)}"
        f"<AutoDeleteOnIdle>{MAX_DURATION}</AutoDeleteOnIdle>"
        "<EntityAvailabilityStatus>Available</EntityAvailabilityStatus></SubscriptionDescription>"
    )


def topic_description(subscription_count: int, created_at: _dt.datetime) -> str:
    when = timestamp(created_at)
    return (
        f'<TopicDescription xmlns="{SB_NS}" xmlns:i="{XSI_NS}">'
        f"<DefaultMessageTimeToLive>{MAX_DURATION}</DefaultMessageTimeToLive>"
        "<MaxSizeInMegabytes>1024</MaxSizeInMegabytes><RequiresDuplicateDetection>false</RequiresDuplicateDetection>"
        "<DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow>"
        "<EnableBatchedOperations>true</EnableBatchedOperations><SizeInBytes>0</SizeInBytes>"
        "<FilteringMessagesBeforePublishing>false</FilteringMessagesBeforePublishing>"
        "<IsAnonymousAccessible>false</IsAnonymousAccessible><AuthorizationRules/><Status>Active</Status>"
        f"{_el('CreatedAt', when)}{_el('UpdatedAt', when)}{_el('AccessedAt', when)}"
        f"<SupportOrdering>true</SupportOrdering>{_el('SubscriptionCount', subscription_count)}"
        f"<AutoDeleteOnIdle>{MAX_DURATION}</AutoDeleteOnIdle><EnablePartitioning>false</EnablePartitioning>"
        "<EntityAvailabilityStatus>Available</EntityAvailabilityStatus>"
        "<EnableSubscriptionPartitioning>false</EnableSubscriptionPartitioning><EnableExpress>false</EnableExpress>"
        "</TopicDescription>"
    )


def namespace_description(name: str, sku: str, created_at: _dt.datetime) -> str:
    """What ``GET /$namespaceinfo`` describes: the namespace's name and tier."""
    when = timestamp(created_at)
    return (
        f'<NamespaceInfo xmlns="{SB_NS}" xmlns:i="{XSI_NS}">{_el("CreatedTime", when)}{_el("MessagingSKU", sku)}'
        f"{_el('MessagingUnits', 1 if sku == 'Premium' else 0)}{_el('ModifiedTime', when)}{_el('Name', name)}"
        "<NamespaceType>Messaging</NamespaceType></NamespaceInfo>"
    )


def entry(base: str, path: str, title: str, description: str, updated: _dt.datetime, *, standalone: bool) -> str:
    """An ATOM entry for the entity at ``path`` (relative to the namespace URL ``base``)."""
    when = timestamp(updated)
    ns = f' xmlns="{ATOM_NS}"' if standalone else ""
    href = f"{base}/{path}"
    return (
        f"<entry{ns} xml:base={quoteattr(href)}>{_el('id', href)}<title type=\"text\">{escape(title)}</title>"
        f"{_el('published', when)}{_el('updated', when)}"
        f"<link rel=\"self\" href={quoteattr(path)}/>"
        f'<content type="application/xml">{description}</content></entry>'
    )


def feed(self_href: str, title: str, entries: Iterable[str], updated: _dt.datetime, next_href: str | None) -> str:
    """An ATOM feed; the link to the next page comes second, where the Python SDK looks for it."""
    links = f'<link rel="self" href={quoteattr(self_href)}/>'
    if next_href:
        links += f'<link rel="next" href={quoteattr(next_href)}/>'
    return (
        f'<?xml version="1.0" encoding="utf-8"?><feed xmlns="{ATOM_NS}">'
        f'<title type="text">{escape(title)}</title>{_el("id", self_href)}{_el("updated", timestamp(updated))}'
        f"{links}{''.join(entries)}</feed>"
    )


def error(code: int, detail: str) -> str:
    """The service's error body."""
    return f"<Error>{_el('Code', code)}{_el('Detail', detail)}</Error>"
