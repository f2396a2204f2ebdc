"""Voices: uploaded voices (store: records on disk, index, admission), their cached features, precomputed voices, ref_audio sources.

Framework-free building blocks for the gateway's /v1/audio/voices routes and for resolving
`voice=` / `ref_audio=` in speech requests. Client errors are ttscore.contract.errors.InvalidRequest
subclasses (400; VoiceNotFound carries status = 404).
"""

from .admission import VoiceStoreSettings
from .audio_io import ALLOWED_MIME_TYPES, decode_audio, probe_audio, resolve_mime_type, sniff_container
from .errors import UploadTooLarge, VoiceNotFound, VoiceSettingsError
from .features import FeatureCache, VoiceFeatures
from .multipart import FormFile, MultipartForm, check_content_length, parse_multipart_form, read_limited
from .precomputed import PrecomputedVoice, load_precomputed_voices
from .records import VoiceRecord, VoiceStorageError, delete_response, upload_response
from .sources import RefAudioSettings, load_ref_audio
from .store import VoiceStore

__all__ = [
    "ALLOWED_MIME_TYPES",
    "FeatureCache",
    "FormFile",
    "MultipartForm",
    "PrecomputedVoice",
    "RefAudioSettings",
    "UploadTooLarge",
    "VoiceFeatures",
    "VoiceNotFound",
    "VoiceRecord",
    "VoiceSettingsError",
    "VoiceStorageError",
    "VoiceStore",
    "VoiceStoreSettings",
    "check_content_length",
    "decode_audio",
    "delete_response",
    "load_precomputed_voices",
    "load_ref_audio",
    "parse_multipart_form",
    "probe_audio",
    "read_limited",
    "resolve_mime_type",
    "sniff_container",
    "upload_response",
]
