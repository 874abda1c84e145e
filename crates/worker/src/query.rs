//! Query service (being built): `<prefix>.query.message.<conv>.<msg>` and
//! `<prefix>.query.history.<conv>` over the async-nats service API.
