# ruff: noqa: E501  (credential samples are long tokens, kept whole on one line to be read as they appear)
"""Credential samples for the redactor's coverage table, near-misses, and ordinary text it must leave alone.

Every value is made up (random characters in each format's shape); none was ever a live credential.
`FORMATS` are the 37 formats of issue 21: name -> (text as it shows up in a conversation, the part
that must not survive redaction). `EXTRA` is a larger corpus of formats beyond those 37.
"""

from __future__ import annotations

import base64
import json

_PEM_BODY = (
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDKxEa9l1Wy8Ca7RVUSl/C5VTOxK88aFsyOqwUOsOszfSLK80bgEu3\n"
    "y2jM+nL0uf1kB3SfBuHe/GGi9p33sKvYaC5kZDkDS6MIzz+8KPYqMd0hCZHWidmvs/M+zZKLMz8YdV0dI1pCVZnGqrLZTjNkC+JEn34\n"
    "xNiwH7/0iwwKQRD4xqHtKYoZhqKdXhVDVhKHUsZzDCqE3SyxwvLzgCT4rnysbwBQ9MpUAAf1hCRJXIUUR3L0=\n"
)
_RSA_PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{_PEM_BODY}-----END RSA PRIVATE KEY-----\n"
_PUTTY = (
    "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy@build-7\nPublic-Lines: 2\n"
    "AAAAC3NzaC1lZDI1NTE5AAAAIFq8nV3rJ0m9cXkW2dE7yTt4hL6uPa1sB0oQzR5fGi8e\nAAAAAA==\n"
    "Private-Lines: 1\nZ2e796AaSUKykNaPmLjFvWpdrhCIfYTQcKGtTwQYEutQ/NjoT9/fdEsVrvY82qOH2j+R\n"
    "Private-MAC: 97f86aafd78655358fd87823926507dd402e2dbcef85979245da8bc3b1267eaf\n"
)
_B64_KEY = base64.b64encode(_RSA_PEM.encode()).decode()
_BASIC = base64.b64encode(b"deploy:Tr0ub4dor&3").decode()

FORMATS: dict[str, tuple[str, str]] = {
    "pem_rsa_private_key": (f"$ cat ~/.ssh/id_rsa\n{_RSA_PEM}", "y2jM+nL0uf1kB3SfBuHe"),
    "openssh_private_key": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "QyNTUxOQAAACBavJ1d6ydJvXF5FtnRO8k7eIS+rj2tbAdKEM0eXxovHgAAAJgl2mNIJdpj\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "QyNTUxOQAAACBavJ1d6ydJ",
    ),
    "gcp_service_account_key": (
        '{"type": "service_account", "project_id": "build-prod", "private_key_id": '
        '"c85d609cd68cf971b8bad185753a755a9d8a6cc9", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
        + _PEM_BODY.replace("\n", "\\n")
        + '-----END PRIVATE KEY-----\\n", "client_email": "ci@build-prod.iam.gserviceaccount.com"}',
        "y2jM+nL0uf1kB3SfBuHe",
    ),
    "putty_private_key": (_PUTTY, "Z2e796AaSUKykNaPmLjFvWpdrhCIfYTQ"),
    "base64_private_key": (
        f"apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\ndata:\n  tls.key: {_B64_KEY}\n",
        _B64_KEY[40:80],
    ),
    "aws_access_key_id": ("export AWS_ACCESS_KEY_ID=AKIAQX4BRT7MNOP2WXYZ", "AKIAQX4BRT7MNOP2WXYZ"),
    "aws_secret_labelled": (
        "[default]\naws_secret_access_key = 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\n",
        "v11K9B8xEabV2isDDf304eQ",
    ),
    "aws_secret_unlabelled": (
        "Access key ID,Secret access key\nAKIAQX4BRT7MNOP2WXYZ,v11K9B8xEabV2isDDf304eQ+oVctlpc6uRZ/txe8\n",
        "v11K9B8xEabV2isDDf304eQ",
    ),
    "github_classic_token": (
        "git clone https://github.com/acme/app\nGH_TOKEN ghp_30peXmnRZ5QW8W5LUehJEJ0ymv7j4IAsx9CG",
        "30peXmnRZ5QW8W5LUehJEJ0ymv7j4IAsx9CG",
    ),
    "github_fine_grained_token": (
        "gh auth login --with-token <<< github_pat_yuFyrb1fkTTFaFeJMVHoKM_uJNhlQkOw17vwWM7tpgke70lXBxkRc"
        "RH5Q9pA6k9VLa4wFGyQp74pkJeCZA",
        "uJNhlQkOw17vwWM7tpgke70",
    ),
    "gitlab_token": (
        "curl -H 'PRIVATE-TOKEN: glpat-XVEd1sd2qQscApkze3vP' https://gitlab.com/api/v4/user",
        "XVEd1sd2qQscApkze3vP",
    ),
    "openai_key": (
        "OPENAI_API_KEY=sk-proj-5jjVUEdqi9PH6UEb8n51T3BlbkFJxYj4xMXBFL52EtiILriX",
        "5jjVUEdqi9PH6UEb8n51",
    ),
    "anthropic_key": (
        "client = Anthropic(api_key='sk-ant-api03-bWqdHPF1GZrrsmYmxd5sjpKqMPY_CvxxWzfhbX7iYwDGOfFXtNL-mhPN"
        "LyiPzTiO1njj5c48XZjCdg3fFJZ26EZXP-Dke')",
        "bWqdHPF1GZrrsmYmxd5sjpKqMPY",
    ),
    "stripe_secret_key": ("stripe.api_key = 'sk_live_ElFxTM4nXCOOWNQU2MS0RqpE'", "ElFxTM4nXCOOWNQU2MS0RqpE"),
    "stripe_webhook_secret": (
        "STRIPE_WEBHOOK_SECRET whsec_6FytNy0H9T6akumt4zTjfJlfHtN8yVVD",
        "6FytNy0H9T6akumt4zTjfJlfHtN8yVVD",
    ),
    "slack_bot_token": (
        "SLACK_BOT_TOKEN xoxb-2212345678901-3412345678901-g9kTBnRvxPLRmqf8buGq829j",
        "g9kTBnRvxPLRmqf8buGq829j",
    ),
    "slack_webhook_url": (
        'curl -X POST -d \'{"text": "deployed"}\' https://hooks.slack.com/services/T6MPRYKZ3/BZ13RLYRGMN/'
        "cwZO73TxbeGLczMCSCpa8Ijg",
        "cwZO73TxbeGLczMCSCpa8Ijg",
    ),
    "google_api_key": (
        "https://maps.googleapis.com/maps/api/geocode/json?key=AIzaNy6VaVvr3gNy1ZFC7cjk3yth_-8RtItTKMb",
        "Ny6VaVvr3gNy1ZFC7cjk3yth",
    ),
    "gcp_oauth_client_secret": (
        '{"installed": {"client_id": "1234.apps.googleusercontent.com", '
        '"client_secret": "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"}}',
        "jixmyUIThue_JZuenDTG0zy2kPCB",
    ),
    "jwt": (
        "Cookie: session=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiIsIm5hbWUiOiJBZGEifQ."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    "bearer_token": (
        "Authorization: Bearer 9d8a6cc9179a79d62ee55e1cf2f53009402e2dbc",
        "9d8a6cc9179a79d62ee5",
    ),
    "basic_auth_header": (f"GET /api HTTP/1.1\nAuthorization: Basic {_BASIC}\n", _BASIC),
    "postgres_url": ("engine = create_engine('postgresql://app:Xk9m2Qv7@db.internal:5432/app')", "Xk9m2Qv7"),
    "redis_url_password_only": ("REDIS_URL=redis://:s3cr3tPw@cache:6379/0", "s3cr3tPw"),
    "mongodb_srv_url": (
        "mongodb+srv://admin:Hq2wZr8pL1@cluster0.ab1cd.mongodb.net/?retryWrites=true",
        "Hq2wZr8pL1",
    ),
    "database_url_env": ("DATABASE_URL=mysql://root:7xKpQ2@127.0.0.1:3306/shop", "7xKpQ2"),
    "password_short": ("db:\n  user: app\n  password: hunter2\n", "hunter2"),
    "password_long": ('export DB_PASSWORD="correct-horse-battery-staple"', "correct-horse-battery"),
    "huggingface_token": (
        "HF_TOKEN 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",
        "GcUwMIOOPlbTxFEkCZbrRdnRXPNIMhtynD",
    ),
    "npm_token": (
        "//registry.npmjs.org/:_authToken npm_7SYxa6wlNqMbWyPVkl7IG4AnoGJsXCVX49x6",
        "7SYxa6wlNqMbWyPVkl7IG4AnoGJsXCVX49x6",
    ),
    "pypi_token": (
        "twine upload -u __token__ -p pypi-AgEIcHlwaS5vcmcCJDkEZwTUqd2dAnBVLpuE27_yBGx3WC-9Hf6AeR4MrCuWsYeaL6z"
        "-D9hdVq_Q7TX5jGnVG6pzQjNFqsHnLBAr__BeQVbysKhH0hpcD4-V3cUsSZ46C4Dc6ClS-tvbIPQMBg6xztbutCovoZppAAckFCmF dist/*",
        "kEZwTUqd2dAnBVLpuE27",
    ),
    "azure_storage_connection_string": (
        "DefaultEndpointsProtocol=https;AccountName=acmelogs;AccountKey=aN0EzJqit9UR/xfO9l0TKIPxhlOUrr37h8eWGzu"
        "TLvmmRkyfncc5iuJ2Gb/ZNvJvumUX/Zup3l8J2WZTEG9tVA==;EndpointSuffix=core.windows.net",
        "aN0EzJqit9UR/xfO9l0TKIPxhlOUrr37",
    ),
    "azure_sas_token": (
        "https://acmelogs.blob.core.windows.net/logs/app.log?sv=2022-11-02&ss=b&srt=o&sp=r&se=2025-01-01T00:00:00Z"
        "&spr=https&sig=rAZ25n%2B1wGGPXLz1Sai8SpMoHX2bp8JVyg6LiGx2Pgw%3D",
        "rAZ25n%2B1wGGPXLz1Sai8",
    ),
    "sendgrid_key": (
        "SENDGRID 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",
        "owL5L0YoJSa0G7OHSrSTAulJuaRfvSBdfdwPDqPvzmw",
    ),
    "twilio_credentials": (
        "from twilio.rest import Client\nclient = Client('AC9d8a6cc9179a79d62ee55e1cf2f53009', '402e2dbcef85979245da8bc3b1267eaf')",
        "402e2dbcef85979245da8bc3b1267eaf",
    ),
    "databricks_token": (
        "databricks workspace ls /Shared --profile ci  # https://adb-1.azuredatabricks.net with dapic85d609cd68cf971b8bad185753a755a",
        "c85d609cd68cf971b8bad185753a755a",
    ),
    "shopify_token": (
        "X-Shopify-Access-Token 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",
        "97f86aafd78655358fd87823926507dd",
    ),
}
"""The 37 formats: name -> (realistic text, the secret part that must not survive)."""

EXTRA: dict[str, tuple[str, str]] = {
    "aws_sts_json": (
        '{"Credentials": {"AccessKeyId": "ASIAQX4BRT7MNOP2WXYZ", "SecretAccessKey": '
        '"v11K9B8xEabV2isDDf304eQ+oVctlpc6uRZ/txe8", "Expiration": "2025-01-01T00:00:00Z"}}',
        "v11K9B8xEabV2isDDf304eQ",
    ),
    "git_credential_url": (
        "git remote add origin https://x-access-token:Qm9vZ2xlLWFjY2Vzcy10b2tlbi0xMjM@github.com/acme/app",
        "Qm9vZ2xlLWFjY2Vzcy10b2tlbi0xMjM",
    ),
    "jdbc_password_param": ("jdbc:postgresql://db:5432/app?user=app&password=Vq8xL2mZ&ssl=true", "Vq8xL2mZ"),
    "ec_private_key": (
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBl1Wy8Ca7RVUSl/C5VTOxK88aFsyOqwUOsOszfSLK80oAoGCCqGSM49\n"
        "AwEHoUQDQgAEq8nV3rJ0m9cXkW2dE7yTt4hL6uPa1sB0oQzR5fGi8eAAAAAAZ2e796Aa==\n-----END EC PRIVATE KEY-----",
        "MHcCAQEEIBl1Wy8Ca7RVUSl",
    ),
    "encrypted_pem": (
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,9D8A6CC9179A79D6\n\n"
        + _PEM_BODY
        + "-----END RSA PRIVATE KEY-----",
        "y2jM+nL0uf1kB3SfBuHe",
    ),
    "pgp_private_key": (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGXr3mIBCADKxEa9l1Wy8Ca7RVUSl/C5VTOxK88aFsyOqwUOsOszfSLK80bg\n"
        "=Ab12\n-----END PGP PRIVATE KEY BLOCK-----",
        "lQOYBGXr3mIBCADKxEa9l1Wy8",
    ),
    "truncated_private_key": (
        "head -3 id_rsa\n-----BEGIN RSA PRIVATE KEY-----\n" + _PEM_BODY[:150],
        "y2jM+nL0uf1kB3SfBuHe",
    ),
    "github_app_token": (
        "GITHUB_TOKEN is ghs_jj50rbS37YQsq0mGQIFvWKx8PbwdazbIcNcA",
        "jj50rbS37YQsq0mGQIFvWKx8PbwdazbIcNcA",
    ),
    "gitlab_runner_token": (
        "gitlab-runner register --token glrt-3vTQFi8nLURcKdT-Jr1v",
        "3vTQFi8nLURcKdT-Jr1v",
    ),
    "openrouter_key": (
        "using 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",
        "1afb91001cd795700b6306b58dc407b5",
    ),
    "groq_key": (
        "GROQ 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",
        "wPlJ2RgvGOkKY3aWDFYiICt5GISK",
    ),
    "xai_key": (
        "grok via xai-xW4pbXtdkCNAWbPnRs69KHJa2rFtSGo5TUxKnpu0U746ilmtHlpJPs0QX91TATnGW9a4SuJpjAvwGRq9",
        "xW4pbXtdkCNAWbPnRs69KHJa2rFt",
    ),
    "discord_bot_token": (
        "bot.run('M5lcWs84433AWTbxpCSh09bn.dHfyl4.GQDegSiI0vnJEIfpQdP1E2gXNLB')",
        "GQDegSiI0vnJEIfpQdP1E2gXNLB",
    ),
    "telegram_bot_token": (
        "https://api.telegram.org/bot7123456789:AAF0FTIjx8nk0RS3mA9MlT8Ys3Jo87zYHLp/getMe",
        "F0FTIjx8nk0RS3mA9MlT8Ys3Jo87zYHLp",
    ),
    "mailchimp_key": (
        "mailchimp key 9dd121f05c244edd4fdff56a7ec302a7-us14",
        "9dd121f05c244edd4fdff56a7ec302a7",
    ),
    "mailgun_key": ("MAILGUN key-0ba26ea2418062620b822b4bf6c5491f", "0ba26ea2418062620b822b4bf6c5491f"),
    "square_token": ("square sq0atp-Ke48FDyrnDQjWSmI0l3HI5", "Ke48FDyrnDQjWSmI0l3HI5"),
    "digitalocean_token": (
        "doctl auth init -t dop_v1_f30ed4c60fc621e3b4ae96457312a3f103f0be4754c82a66af193387dc4222d6",
        "f30ed4c60fc621e3b4ae96457312a3f1",
    ),
    "age_secret_key": (
        "# created: 2024-05-01\nAGE-SECRET-KEY-15L2FPS5GNW8ZU0ENF4U6PY2CVRLZN4YXVYLYYM73LNPN73AX0NL4QYEDE8",
        "5L2FPS5GNW8ZU0ENF4U6PY2CVRLZN4YXV",
    ),
    "vault_token": (
        "VAULT hvs._z29t352E1IhaLVf6LWl_5UC9AGmtRhtcK9HxRnqw8O53VyWxtF4lvR4MoFBZRXku-8T_XKdi9uE0bKzWTPOV7HuuVxw",
        "_z29t352E1IhaLVf6LWl_5UC9AGmtRhtcK9H",
    ),
    "doppler_token": (
        "doppler dp.pt.ij0txykymg4xg6zlhn239fccs4kr9isvcd3jfvacoxf",
        "ij0txykymg4xg6zlhn239fccs4kr9",
    ),
    "linear_key": (
        "linear lin_api_oxji9gz56gxi95cvuegvh5rmpbqb7hhhwpv8cefv",
        "oxji9gz56gxi95cvuegvh5rmpbqb7",
    ),
    "notion_token": (
        "notion 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",
        "52378576688wMoi6e1ySrU7hF9oXfR8",
    ),
    "newrelic_key": ("newrelic NRAK-XFQX2Z7HBN9P6DPEEM5WSX3A7TZ", "XFQX2Z7HBN9P6DPEEM5WSX3A7TZ"),
    "heroku_key": (
        "heroku HRKU-HPZ11cqqHShl3nCTKASz0Zs2XDtfJ6wI3SMQc8kWU-7PC9NiniWAG4e0xGCn",
        "HPZ11cqqHShl3nCTKASz0Zs2X",
    ),
    "grafana_token": (
        "grafana glsa_mXCkBFXBLvWYFcrwRNm7g1vvWKc34wPv_e4bdcd9e",
        "mXCkBFXBLvWYFcrwRNm7g1vvWKc34wPv",
    ),
    "postman_key": (
        "postman PMAK-ec40888a1bf00f6ebd3be843-fef570a6fcb8c976ca80506ad99db02d0c",
        "fef570a6fcb8c976ca80506ad99",
    ),
    "terraform_token": (
        "terraform sw7j2efvupg785.atlasv1.979pzqs-_942t8e6vxvb_18ixwkmnmhk9_0id1rcg0lwippb8tko4etnqdwrcquzmdz",
        "979pzqs-_942t8e6vxvb_18ixwkmnmhk9",
    ),
    "pulumi_token": (
        "pulumi login with pul-8b69673e55884b429a223680ed5c7154df527d8d",
        "8b69673e55884b429a223680ed5c7154",
    ),
    "dockerhub_token": (
        "docker login -u acme -p dckr_pat_NRjnQ2jkq8Ixv5U3SOawLPPD8_Q",
        "NRjnQ2jkq8Ixv5U3SOawLPPD8_Q",
    ),
    "docker_config_auth": (
        '{"auths": {"https://index.docker.io/v1/": {"auth": "YWNtZTpkY2tyX3BhdF9YcTdwTG0y"}}}',
        "YWNtZTpkY2tyX3BhdF9YcTdwTG0y",
    ),
    "atlassian_token": (
        "jira ATATT3_4tFE0d9aYAaA=RBdOeZZ1Qk=l9uGtw8zfYFS7cGGZ=bZLReF8Qyuj_Qk72EnRN2LFXwNdR3DDaHZ=aYEoglwBKpl3ESY"
        "Z0-yvsx49=01iLRBgRv75UVSma1LVN4cOiUIJtaUqTJVUWyMZW6qQvNbCA5K7qXA6ZPSqUhDvlBS=B2ejH6==Ggupxwpv",
        "RBdOeZZ1Qk=l9uGtw8zfYFS7cGGZ",
    ),
    "supabase_token": (
        "supabase sbp_52f79d1dd2c7b49a2b23849ce8cea53020c44be3",
        "52f79d1dd2c7b49a2b23849ce8cea530",
    ),
    "sentry_user_token": (
        "sentry 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",
        "246df5a975f25fab81bcfafd94d8cb86",
    ),
    "figma_token": ("figma figd_37FyjT4GzIKE-FsZRKX_TmxrHApFDBc_mfrMoh1Q", "37FyjT4GzIKE-FsZRKX_TmxrHApFDBc"),
    "curl_user_password": ("curl -u deploy:Xq7pLm2w https://ci.example.com/api/jobs", "Xq7pLm2w"),
    "netrc_password": ("machine api.example.com login bot password Xq7pLm2wQ9", "Xq7pLm2wQ9"),
    "pgpass_line": ("db.internal:5432:app:app:Xq7pLm2wQ9", "Xq7pLm2wQ9"),
    "mysql_pwd_env": ("MYSQL_PWD=Xq7pLm2w mysql -u root", "Xq7pLm2w"),
    "client_secret_short": ('{"client_id": "acme-ci", "client_secret": "q8Z!v2Lm"}', "q8Z!v2Lm"),
    "api_key_header": (
        "curl -H 'X-API-Key: 3f9a1c7e5b2d8f4a6c0e9b1d' https://api.example.com",
        "3f9a1c7e5b2d8f4a6c0e9b1d",
    ),
    "env_pass": ("export SMTP_PASS=Xq7pLm2w9", "Xq7pLm2w9"),
    "hex_private_key": (
        "PRIVATE_KEY=0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
        "4c0883a69102937d6231471b",
    ),
    "credentials_json": ('{"credentials": "ops:Tr0ub4dor-3"}', "Tr0ub4dor-3"),
}
"""Formats beyond the 37 (same shape), for a second coverage figure."""

ORDINARY: dict[str, str] = {
    "prose": (
        "Reset your password from the account page, then sign in again. The secret to a fast build is "
        "caching; tokens are counted per request and a bearer of good news is welcome. Basic usage: run "
        "the installer. Sales in Asia grew 12% (see the Q3 report). A private key must never be shared; "
        "store the API key in the vault and rotate access keys every 90 days. Authorization is checked "
        "by the gateway, the session token expires after an hour."
    ),
    "code": (
        "import os\n\ndef connect(password: str | None = None, token=None):\n"
        "    password = os.environ['DB_PASSWORD']\n    token = get_token(scope='repo')\n"
        "    api_key = settings.api_key\n    secret = self.secret\n    client = Client(api_key=api_key, token=token)\n"
        "    response = llm.complete(prompt, max_tokens=1024, temperature=0.2)\n"
        "    password_hash = bcrypt.hash(password)\n    return {'password': None, 'token_count': 12}\n"
    ),
    "config_references": (
        "db:\n  password: ${DB_PASSWORD}\n  token: <secret:GITHUB_TOKEN>\n  secret: '{{ vault_secret }}'\n"
        "  api_key: null\n  passwordless: true\n  password_file: /run/secrets/db\n"
    ),
    "ids_and_digests": (
        "conversation 123e4567-e89b-12d3-a456-426614174000 at commit 81d672c0a1b2c3d4e5f60718293a4b5c6d7e8f90, "
        "image sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, "
        "etag d41d8cd98f00b204e9800998ecf8427e, request 01HZX4Y7Q9K2M3N4P5R6S7T8V9"
    ),
    "base64_of_non_secrets": (
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==\n"
        "payload eyJmb28iOiJiYXIiLCJuIjoxfQ== and "
        + base64.b64encode(b"The quick brown fox jumps over the lazy dog, again and again. " * 3).decode()
    ),
    "urls_without_credentials": (
        "see https://github.com/acme/app/pull/12?tab=files#diff-3f2a, https://user@example.com/login, "
        "postgresql://app@db.internal:5432/app, http://localhost:8000/conversations?limit=10&offset=20, "
        "redis://cache:6379/0, https://maps.googleapis.com/maps/api/js?callback=init, "
        "https://hooks.slack.com/ docs, mailto:ops@example.com, https://docs.python.org/3/library/re.html"
    ),
    "logs_and_shell": (
        "2024-05-01T12:00:00.123456+00:00 INFO consume.views partition=3 offset=1200 lag=0\n"
        "$ ls -l\n-rw-r--r-- 1 dev dev 4096 May  1 12:00 secrets.py\n"
        'Traceback (most recent call last):\n  File "/app/infra/secrets.py", line 42, in redact\n'
        "KeyError: 'token'\n$ git push -u origin main\n"
    ),
    "json_event": (
        '{"id": "e-17", "kind": "ActionEvent", "source": "agent", "tool_name": "execute_bash", '
        '"action": {"command": "pytest -q tests/infra/test_secrets.py"}, "llm_response_id": "chatcmpl-9xYz", '
        '"metrics": {"prompt_tokens": 1200, "completion_tokens": 80, "cache_read_tokens": 0}}'
    ),
}
"""Ordinary text the redactor must leave exactly as it is (no false positives)."""


def near_misses() -> str:
    """Text full of near-misses: every sample cut before its secret is complete, and each trigger bare."""
    parts = []
    for text, secret in (*FORMATS.values(), *EXTRA.values()):
        cut = text.index(secret) + len(secret) // 3
        parts.append(text[:cut] + " ...\n")
    return "".join(parts)


def openhands_batch(events: int = 5) -> str:
    """A webhook batch as an agent-server posts it (bench/ingest.py's shape: ~4 KB for 5 events)."""
    out: list[dict[str, object]] = []
    for i in range(events):
        text = {"cache_prompt": False, "type": "text", "text": f"step {i}: " + "lorem ipsum " * 30}
        base = {
            "id": f"5f0c{i:04d}-8a1e-4c2b-9d3f-0e1a2b3c4d5e",
            "timestamp": f"2026-05-01T12:00:00.{i:06d}",
            "parent_id": out[-1]["id"] if out else None,
        }
        if i % 3 == 0:
            call = {
                "id": f"call_{i}",
                "name": "glob",
                "arguments": json.dumps({"pattern": f"src/**/*{i}.py"}),
            }
            body: dict[str, object] = {
                "source": "agent",
                "thought": [text],
                "action": {"pattern": f"src/**/*{i}.py", "kind": "GlobAction"},
                "tool_name": "glob",
                "tool_call_id": f"call_{i}",
                "tool_call": call,
                "llm_response_id": f"resp-{i}",
                "security_risk": "UNKNOWN",
                "kind": "ActionEvent",
            }
        elif i % 3 == 1:
            body = {
                "source": "environment",
                "tool_name": "glob",
                "tool_call_id": f"call_{i - 1}",
                "observation": {
                    "content": [text],
                    "is_error": False,
                    "files": [f"src/a{i}.py"],
                    "kind": "GlobObservation",
                },
                "action_id": out[-1]["id"],
                "kind": "ObservationEvent",
            }
        else:
            body = {
                "source": "agent",
                "llm_message": {"role": "assistant", "content": [text]},
                "kind": "MessageEvent",
            }
        out.append({**base, **body})
    return json.dumps(out)
