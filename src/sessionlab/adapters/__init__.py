"""The course's final store behind the interfaces real agent frameworks use.

`sessionlab.adapters.agents_sdk.FileSession`: the OpenAI Agents SDK's session protocol
(`pip install -e '.[agents]'` for the SDK itself; the adapter needs only the store).
"""
