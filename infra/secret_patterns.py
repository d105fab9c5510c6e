"""The credential shapes the redactor detects (`infra.secrets.redact_patterns`), each linear in its input.

A `Rule` is a kind (the placeholder says `<secret:detected.KIND>`), a Python pattern, the triggers
that must occur in a text before the pattern runs on it, and optionally a check of each match.

Each pattern does a bounded amount of work per position of Python's backtracking engine: a token
starts only where a run of its characters starts (the `_G` guard, checked after the first
character: never inside a longer word), runs are possessive (`++`, `{n,}+`: never given back), and
whatever lies between a start and an end is bounded. Most start with a literal character, so the
engine skips to where that character is. `tests/infra/test_secrets_coverage.py` times every rule
on adversarial inputs (records as large as the API redacts at once, a body limit of them, and with
`-m slow` every family at the body limit) against a plain scan of the same text.

No match holds a quote or a backslash that is not part of a `\\n` escape, and none starts inside an
escape: a placeholder put in place of a match inside a JSON string keeps the JSON valid.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

_G = r"(?:(?<=\\[nrt].)|(?<![A-Za-z0-9_\\-].))"
"""After a token's first character: the one before it is not part of a word (or ends a `\\n` escape)."""
_NL = r"(?:\r?\n|(?:\\{1,8}r)?\\{1,8}n)"
"""A line break, raw or escaped in a JSON string (once or more)."""
_KEY_END = r"\\{0,7}[\"']?[ \t]{0,4}(?:=>|:=|[:=])[ \t]{0,4}\\{0,7}[\"']?"
"""From a key name to its value: an optional (escaped) quote, `:`, `=`, `:=` or `=>`, another quote."""
_VALUE = r"(?!-----)[^\s\"'`,;<>\\&|(){}\[\]]++"
"""An assigned value, up to a delimiter (never a placeholder, never a PEM block another rule hides)."""


class Rule(NamedTuple):
    """One credential shape: what a `keep` group matched (a key name, a URL's user) stays visible."""

    kind: str
    pattern: str
    triggers: tuple[str, ...]
    """What a text must hold (one of them, case-insensitive) before `pattern` runs on it: RE2 syntax,
    but only literals, alternations and character classes, never a repetition. So the automaton
    of all triggers is a trie and its one pass over a text is linear with a small constant whatever
    the text (with a counted repetition in a trigger, hex text with `ac` at chosen offsets thrashed
    RE2's cache: 2 s per MB, and RE2 gives up a set match that runs out of memory)."""
    check: Callable[[re.Match[str]], bool] | None = None
    """Whether a match is a credential; without a check, every match is."""


def parts(match: re.Match[str]) -> tuple[str, str]:
    """A match as (what stays visible, what is hidden)."""
    keep = match.groupdict().get("keep") or ""
    return keep, match.group(0)[len(keep) :]


def _token(first: str, rest: str) -> str:
    return f"{first}{_G}{rest}"


def _assigned(keys: str, triggers: tuple[str, ...]) -> Rule:
    return Rule("assigned_secret", rf"(?i)(?P<keep>{keys}{_KEY_END}){_VALUE}", triggers, assigned_value)


def _service(first: str, rest: str, trigger: str) -> Rule:
    return Rule("service_token", _token(first, rest) + r"(?![A-Za-z0-9])", (trigger,))


def _decodes_to(value: str, wanted: bytes) -> bool:
    head = "".join(value[:120].split()).replace("\\n", "").replace("\\r", "")[:80]
    try:
        return wanted in base64.b64decode(head[: len(head) // 4 * 4], validate=False)
    except (binascii.Error, ValueError):
        return False


def _is_basic_credential(value: str) -> bool:
    """`user:password` in base64 (so the word "basic" before a word is not taken for one)."""
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii() and decoded.decode().isprintable()


_NOT_SECRETS = frozenset(
    ("none", "null", "nil", "true", "false", "undefined", "required", "optional", "str", "string", "bytes",
     "int", "env", "redacted", "hidden", "masked", "secret", "password", "token", "example")
)  # fmt: skip
_CODE = re.compile(
    r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]+)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"
)
"""Values that read as code rather than a literal: `os.environ`, `db_password`, `userPassword`, `S3_KEY`."""
_PASSWORD_KEY = re.compile(r"(?i)pass|pwd")


def entropy(value: str) -> float:
    """Shannon entropy of `value`'s characters, in bits per character."""
    counts, total = Counter(value), len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def assigned_value(match: re.Match[str]) -> bool:
    """The entropy rule for `key = value`: a password is one from 6 characters (4 if not all letters);
    a secret, token or key from 12, or from 8 if it mixes character classes at >= 3 bits per character.
    Values that read as code (a name, an attribute, a call, a path, a template) are never one."""
    key, value = parts(match)
    called = match.string[match.end() : match.end() + 1] == "("
    if called or value.lower() in _NOT_SECRETS or len(set(value)) == 1 or value[0] in "$%{~./":
        return False
    if _CODE.fullmatch(value) or value.lower().startswith(("self", "os.", "env", "get")):
        return False
    if _PASSWORD_KEY.search(key):
        return len(value) >= 6 or (len(value) >= 4 and not value.isalpha())
    classes = sum(any(test(c) for c in value) for test in (str.islower, str.isupper, str.isdigit))
    return len(value) >= 12 or (len(value) >= 8 and classes >= 2 and entropy(value[:256]) >= 3.0)


_AWS_ID = "a(?:kia|sia|bia|cca|gpa|ida|roa|npa|nva|ipa|pka)"

RULES: tuple[Rule, ...] = (
    Rule(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,.]|\\{1,8}[nrt]|-(?!----)){16,}+"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
        ("-----begin",),
    ),
    Rule(
        "private_key",
        _token("L", rf"S0tLS1CRUdJTi[A-Za-z0-9+/]*+={{0,2}}(?:{_NL}[A-Za-z0-9+/]{{16,}}+={{0,2}})*+"),
        ("ls0tls1crudjt",),
        lambda match: _decodes_to(match.group(0), b"PRIVATE KEY"),
    ),
    Rule(
        "private_key",
        rf"Private-Lines: ?[0-9]{{1,4}}(?:{_NL}[A-Za-z0-9+/]++={{0,2}}(?![A-Za-z0-9+/=-]))++"
        rf"(?:{_NL}Private-MAC: ?[0-9a-fA-F]++)?",
        ("private-lines:",),
    ),
    Rule("url_password", r"(?P<keep>://[^\s:/?#@\"'<>\\]{0,256}:)[^\s/?#@\"'<>\\]{1,256}(?=@)", ("://",)),
    Rule(
        "aws_access_key_id",
        _token("A", r"(?:KIA|SIA|BIA|CCA|GPA|IDA|ROA|NPA|NVA|IPA|PKA)[0-9A-Z]{16}(?![0-9A-Za-z])"),
        (_AWS_ID,),
    ),
    Rule(
        "aws_secret_access_key",
        rf"(?i)(?P<keep>(?:aws_?secret_?(?:access_?)?key|secret_?access_?key){_KEY_END})"
        r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        ("secret_?access", "aws_?secret"),
    ),
    Rule(
        "aws_secret_access_key",
        r"(?<![A-Za-z0-9/+=_-])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        (_AWS_ID,),
        lambda match: all(
            any(test(c) for c in match.group(0)) for test in (str.isupper, str.islower, str.isdigit)
        ),
    ),
    Rule(
        "github_token",
        _token("g", r"(?:h[pousr]_[A-Za-z0-9]{36,255}+|ithub_pat_[A-Za-z0-9_]{22,255}+)(?![A-Za-z0-9_])"),
        ("gh[pousr]_", "github_pat_"),
    ),
    Rule(
        "gitlab_token",
        _token("g", r"l(?:pat|rt|dt|ptt|oas|cbt|ft|imt)-[A-Za-z0-9_-]{20,}+"),
        ("gl(?:pat|rt|dt|ptt|oas|cbt|ft|imt)-",),
    ),
    Rule(
        "llm_api_key",
        _token("s", r"k-(?:ant-(?:api|admin)[0-9]{2}-|proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_-]{20,}+"),
        ("sk-",),
    ),
    Rule("llm_api_key", _token("g", r"sk_[A-Za-z0-9]{48,}+"), ("gsk_",)),
    Rule("llm_api_key", _token("x", r"ai-[A-Za-z0-9]{60,}+"), ("xai-",)),
    Rule("stripe_key", _token("[srp]", r"k_(?:live|test)_[0-9A-Za-z]{16,}+"), ("[srp]k_(?:live|test)_",)),
    Rule("stripe_key", _token("w", r"hsec_[A-Za-z0-9+/=]{24,}+"), ("whsec_",)),
    Rule(
        "slack_token",
        _token("x", r"(?:ox[abposre]-[A-Za-z0-9-]{10,}+|app-[0-9]-[A-Za-z0-9-]{10,}+)"),
        ("xox[abposre]-", "xapp-"),
    ),
    Rule(
        "slack_webhook",
        r"(?P<keep>hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9_/-]{20,}+",
        (r"hooks\.slack\.com/",),
    ),
    Rule("google_api_key", _token("A", r"Iza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), ("aiza",)),
    Rule("gcp_oauth_secret", _token("G", r"OCSPX-[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])"), ("gocspx-",)),
    Rule(
        "azure_storage_key",
        r"(?P<keep>(?:Account|SharedAccess)Key[ \t]{0,4}=[ \t]{0,4})[A-Za-z0-9+/]{20,}+={0,2}",
        ("accountkey", "sharedaccesskey"),
    ),
    Rule("azure_sas", r"(?P<keep>[?&]sig=)[A-Za-z0-9%+/=]{20,}+", ("[?&]sig=",)),
    Rule("huggingface_token", _token("h", r"f_[A-Za-z]{34}(?![A-Za-z0-9_])"), ("hf_",)),
    Rule("npm_token", _token("n", r"pm_[A-Za-z0-9]{36}(?![A-Za-z0-9_])"), ("npm_",)),
    Rule("pypi_token", _token("p", r"ypi-AgE[A-Za-z0-9_-]{50,}+"), ("pypi-age",)),
    Rule(
        "sendgrid_key", _token("S", r"G\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"), (r"sg\.",)
    ),
    # An account SID and its auth token, where the text names Twilio (two hex strings are
    # otherwise anything; a labelled TWILIO_AUTH_TOKEN= is an assignment anyway).
    Rule(
        "twilio_key",
        rf"(?P<keep>A{_G}C[0-9a-f]{{32}}[^0-9A-Za-z\n]{{1,8}})[0-9a-f]{{32}}(?![0-9A-Za-z])",
        ("twilio",),
    ),
    Rule("databricks_token", _token("d", r"api[0-9a-f]{32}(?:-[0-9])?(?![0-9A-Za-z])"), ("dapi",)),
    Rule(
        "shopify_token",
        _token("s", r"hp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}(?![0-9A-Za-z])"),
        ("shp(?:at|ca|pa|ss)_",),
    ),
    Rule("service_token", r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])", (":aa",)),
    Rule("service_token", r"(?<![0-9a-f])[0-9a-f]{32}-us[0-9]{1,2}(?![A-Za-z0-9])", ("-us[0-9]",)),
    _service("k", r"ey-[0-9a-f]{32}", "key-"),
    _service("s", r"q0(?:atp|csp)-[A-Za-z0-9_-]{22,43}", "sq0(?:atp|csp)-"),
    _service("d", r"o[por]_v1_[a-f0-9]{64}", "do[por]_v1_"),
    _service("A", r"GE-SECRET-KEY-1[0-9A-Z]{58}", "age-secret-key-1"),
    _service("h", r"v[sb]\.[A-Za-z0-9_-]{24,}+", r"hv[sb]\."),
    _service("d", r"p\.(?:pt|st|sa|ct)\.[A-Za-z0-9]{40,44}", r"dp\.(?:pt|st|sa|ct)\."),
    _service("l", r"in_api_[A-Za-z0-9]{40}", "lin_api_"),
    _service("n", r"tn_[0-9]{11}[A-Za-z0-9]{35}", "ntn_[0-9]"),
    _service("N", r"RAK-[A-Z0-9]{27}", "nrak-"),
    _service("H", r"RKU-[A-Za-z0-9_-]{60}", "hrku-"),
    _service("g", r"l(?:sa|c)_[A-Za-z0-9_+/=]{32,}+", "gl(?:sa|c)_"),
    _service("P", r"MAK-[a-f0-9]{24}-[a-f0-9]{34}", "pmak-"),
    Rule("service_token", r"(?<![A-Za-z0-9])[a-z0-9]{14}\.atlasv1\.[a-z0-9_=-]{60,}+", (r"\.atlasv1\.",)),
    _service("p", r"ul-[a-f0-9]{40}", "pul-[0-9a-f]"),
    _service("d", r"ckr_pat_[A-Za-z0-9_-]{27,}+", "dckr_pat_"),
    _service("A", r"TATT3[A-Za-z0-9_=-]{150,}+", "atatt3"),
    _service("s", r"bp_[a-f0-9]{40}", "sbp_[0-9a-f]"),
    _service("s", r"ntry[us]_[A-Za-z0-9+/=_]{40,}+", "sntry[us]_"),
    _service("f", r"igd_[A-Za-z0-9_-]{40}", "figd_"),
    Rule(
        "jwt",
        _token("e", r"yJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"),
        ("eyj",),
    ),
    Rule("bearer_token", r"(?i)(?P<keep>bearer[ \t]{1,4})[A-Za-z0-9._~+/-]{20,}+=*+", (r"bearer\s",)),
    Rule(
        "basic_auth",
        r"(?i)(?P<keep>basic[ \t]{1,4})[A-Za-z0-9+/]{8,}+={0,2}",
        (r"basic\s",),
        lambda match: _is_basic_credential(parts(match)[1]),
    ),
    Rule(
        "user_password",
        r"(?P<keep>-(?<!\S-)(?:u|-user)[ \t]{1,4}[^\s:\"'<>\\]{1,128}:)[^\s\"'<>\\]{1,256}+",
        (r"-u\s", "--user"),
    ),
    Rule(
        "user_password",
        r"(?P<keep>l(?<!\Sl)ogin[ \t]{1,4}[^\s\"'<>\\]{1,128}[ \t]{1,4}password[ \t]{1,4})"
        r"[^\s\"'<>\\]{1,256}+",
        ("login",),
    ),
    _assigned(r"(?:passw(?:or)?d|pwd)", ("passw", "pwd")),
    _assigned(r"pass(?<![a-z]pass)", ("pass",)),
    _assigned(r"secret(?<!<secret)", ("secret",)),
    _assigned(r"api[_-]?key", ("api[_-]?key",)),
    _assigned(r"access[_-]?key", ("access[_-]?key",)),
    _assigned(r"private[_-]?key", ("private[_-]?key",)),
    _assigned(r"token", ("token",)),
    _assigned(r"auth(?<![a-z]auth)", ("auth",)),
    _assigned(r"credentials?", ("credential",)),
)
"""Every credential shape, in the order they are applied (the more specific first)."""
